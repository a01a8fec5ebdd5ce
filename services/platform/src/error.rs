//! Errors of bus operations, with a kind per operation (as async-nats does) and whether a retry
//! can help.

use std::fmt;

/// What a bus operation was doing when it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BusErrorKind {
    /// Connecting to NATS.
    Connect,
    /// Creating streams, consumers or buckets.
    Topology,
    /// Publishing and awaiting the JetStream ack.
    Publish,
    /// An append was rejected because another writer appended first.
    Conflict,
    /// Reading a stored message.
    Read,
    /// Consuming from a consumer.
    Consume,
    /// Encoding or decoding a message.
    Codec,
    /// The embedded nats-server.
    Server,
}

/// A bus operation failed.
#[derive(Debug, thiserror::Error)]
pub struct BusError {
    pub kind: BusErrorKind,
    pub message: String,
}

impl fmt::Display for BusError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.kind, self.message)
    }
}

impl BusError {
    pub fn new(kind: BusErrorKind, message: impl fmt::Display) -> Self {
        Self { kind, message: message.to_string() }
    }

    /// Network and server hiccups heal; codec errors and topology mistakes do not. A conflict
    /// is retryable after re-reading the log.
    pub fn is_retryable(&self) -> bool {
        !matches!(self.kind, BusErrorKind::Codec | BusErrorKind::Topology | BusErrorKind::Server)
    }
}

impl From<halyard_protocol::CodecError> for BusError {
    fn from(e: halyard_protocol::CodecError) -> Self {
        Self::new(BusErrorKind::Codec, e)
    }
}
