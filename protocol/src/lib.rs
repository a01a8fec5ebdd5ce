//! The Halyard wire protocol: every type that crosses a process boundary, and nothing that
//! does I/O.
//!
//! * [`ids`]: typed identifiers (UUIDs on the wire as strings, so any language can read them).
//! * [`envelope`]: the versioned envelope every bus message travels in, and its MessagePack
//!   codec ([`encode`], [`decode`]).
//! * [`event`]: the per-conversation event log (what users see).
//! * [`system`]: lifecycle records of start tasks, sandboxes and conversations.
//! * [`command`]: durable commands between services.
//! * [`subjects`]: the one place where subjects, streams and consumers are named.
//! * [`executor`]: the HTTP API of the in-sandbox executor.
//! * [`webhook`]: webhook subscriptions, delivery jobs and attempts.
//! * [`accounts`]: users, API keys (as salted hashes) and the audit record of admin actions.
//! * [`user`]: each user's own settings, LLM profiles and (sealed) secrets.
//! * [`automation`]: automations (hooks and schedules), their commands and run records.
//! * [`environment`]: environments (setup once) and the snapshots started from after setup.
//! * [`egress`]: outbound access by domain, its layers and the decision on a connection.
//! * [`plugin`]: plugins in Claude Code's format, the marketplaces that list them, and which a
//!   conversation gets.
//!
//! The byte format is pinned by golden fixtures under `tests/fixtures/`; `README.md` beside this
//! crate documents it for clients in other languages.

pub mod accounts;
pub mod agents;
pub mod automation;
pub mod batch;
pub mod command;
pub mod devcontainer;
pub mod egress;
pub mod envelope;
pub mod environment;
pub mod event;
pub mod executor;
pub mod ids;
pub mod org;
pub mod plugin;
pub mod queue;
pub mod subjects;
pub mod system;
pub mod user;
pub mod webhook;

pub use envelope::{CodecError, ENVELOPE_VERSION, Envelope, TraceContext, decode, encode};
pub use ids::{CommandId, ConversationId, EventId, SandboxId, TaskId, UserId};

/// Milliseconds since the Unix epoch, the only clock type on the wire.
pub type UnixMillis = i64;

/// Formats milliseconds since the epoch as RFC 3339 UTC with milliseconds
/// (`2026-11-22T03:49:54.208Z`), the one time format of the JSON surface.
pub fn rfc3339(ms: UnixMillis) -> String {
    let ms = ms.max(0);
    let (secs, milli) = (ms / 1000, ms % 1000);
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{milli:03}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    #[test]
    fn rfc3339_formats_known_instants() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(super::rfc3339(951_782_400_123), "2000-02-29T00:00:00.123Z");
        assert_eq!(super::rfc3339(1_795_319_823_818), "2026-11-22T03:57:03.818Z");
    }
}
