//! HTTP plumbing that knows nothing of Halyard's domain: errors as responses ([`error`]), the
//! OpenAPI document's shared parts ([`api_doc`]), the server with its connection limits
//! ([`server`]), request metrics ([`metrics`]), pages ([`paging`]) and field checks ([`checks`]).

pub mod api_doc;
pub mod checks;
pub mod error;
pub mod metrics;
pub mod paging;
pub mod server;
