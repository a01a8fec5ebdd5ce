//! The envelope every bus message travels in, and its MessagePack codec.
//!
//! Structs are encoded as maps (`rmp_serde::to_vec_named`), never as positional arrays, so a
//! field can be added without breaking older readers: unknown fields are ignored on decode and
//! new optional fields default.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::UnixMillis;
use crate::ids::CommandId;

/// The envelope version this crate writes. Readers reject a higher major version rather than
/// misread it.
pub const ENVELOPE_VERSION: u16 = 1;

/// W3C trace context carried across the bus so one trace spans services.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TraceContext {
    /// `traceparent` header value: `00-<trace id>-<parent span id>-<flags>`.
    pub traceparent: String,
}

/// A versioned message: metadata plus a typed payload.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Envelope<P> {
    /// Envelope format version ([`ENVELOPE_VERSION`]).
    pub v: u16,
    /// Unique message id; also the JetStream de-duplication id.
    pub id: CommandId,
    /// What the payload is, e.g. `event.user_message`, `cmd.conversation.start`.
    pub kind: String,
    /// When the message was created.
    pub time_ms: UnixMillis,
    /// The id of the request this message ultimately serves (a start task, an HTTP request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    /// The id of the message that directly caused this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub causation_id: Option<String>,
    /// Trace context of the span that published this message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<TraceContext>,
    /// The message itself.
    pub payload: P,
}

/// Payload types name their own envelope kind.
pub trait Payload: Serialize + DeserializeOwned {
    /// The envelope `kind` for this payload value.
    fn kind(&self) -> String;
}

impl<P: Payload> Envelope<P> {
    /// Wraps a payload in a fresh envelope stamped `now`.
    pub fn new(payload: P, now: UnixMillis) -> Self {
        Self::with_id(CommandId::new(), payload, now)
    }

    /// Wraps a payload under a caller-chosen id (for idempotent re-publication).
    pub fn with_id(id: CommandId, payload: P, now: UnixMillis) -> Self {
        Self { v: ENVELOPE_VERSION, id, kind: payload.kind(), time_ms: now, correlation_id: None, causation_id: None, trace: None, payload }
    }

    /// Sets the correlation id.
    pub fn correlated(mut self, correlation_id: impl Into<String>) -> Self {
        self.correlation_id = Some(correlation_id.into());
        self
    }

    /// Sets the causation id.
    pub fn caused_by(mut self, causation_id: impl Into<String>) -> Self {
        self.causation_id = Some(causation_id.into());
        self
    }
}

/// Why a message could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("encode failed: {0}")]
    Encode(#[from] rmp_serde::encode::Error),
    #[error("malformed message: {0}")]
    Decode(#[from] rmp_serde::decode::Error),
    #[error("unsupported envelope version {0} (this build reads up to {ENVELOPE_VERSION})")]
    UnsupportedVersion(u16),
}

impl CodecError {
    /// Codec errors never heal by retrying: a malformed message stays malformed.
    pub fn is_retryable(&self) -> bool {
        false
    }
}

/// Encodes an envelope as MessagePack with struct fields as maps.
pub fn encode<P: Serialize>(env: &Envelope<P>) -> Result<Vec<u8>, CodecError> {
    Ok(rmp_serde::to_vec_named(env)?)
}

/// Decodes an envelope, rejecting versions this build does not understand.
pub fn decode<P: DeserializeOwned>(bytes: &[u8]) -> Result<Envelope<P>, CodecError> {
    // Peek at the version first so that a future envelope fails with a clear error instead of a
    // confusing payload mismatch.
    #[derive(Deserialize)]
    struct Version {
        v: u16,
    }
    let version: Version = rmp_serde::from_slice(bytes)?;
    if version.v > ENVELOPE_VERSION {
        return Err(CodecError::UnsupportedVersion(version.v));
    }
    Ok(rmp_serde::from_slice(bytes)?)
}
