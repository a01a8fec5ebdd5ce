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
//!
//! The byte format is pinned by golden fixtures under `tests/fixtures/`; `README.md` beside this
//! crate documents it for clients in other languages.

pub mod command;
pub mod envelope;
pub mod event;
pub mod executor;
pub mod ids;
pub mod subjects;
pub mod system;

pub use envelope::{CodecError, Envelope, ENVELOPE_VERSION, TraceContext, decode, encode};
pub use ids::{CommandId, ConversationId, EventId, SandboxId, TaskId, UserId};

/// Milliseconds since the Unix epoch, the only clock type on the wire.
pub type UnixMillis = i64;
