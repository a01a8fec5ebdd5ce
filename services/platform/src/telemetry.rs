//! Logging and trace context. Logs are structured `tracing` events with fields such as
//! `conversation_id` and `sandbox_id`; a trace id travels across the bus in each envelope's
//! [`TraceContext`] so one request can be followed through every service.

use halyard_protocol::TraceContext;
use tracing_subscriber::EnvFilter;

/// Installs the global subscriber (logs to stderr). `filter` is an `EnvFilter` directive such
/// as `info` or `halyard_agent=debug,info`. Safe to call twice (the second call is ignored).
pub fn init(filter: &str) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    // Colours only for a person at a terminal: a log file keeps `field=value` greppable.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_target(true).with_ansi(ansi).try_init();
}

/// A new root trace context (random trace and span ids).
pub fn new_trace() -> TraceContext {
    let trace = uuid::Uuid::new_v4();
    let span = uuid::Uuid::new_v4();
    TraceContext { traceparent: format!("00-{}-{}-01", crate::keys::to_hex(trace.as_bytes()), crate::keys::to_hex(&span.as_bytes()[..8])) }
}

/// The trace id part of a `traceparent`.
pub fn trace_id(ctx: &TraceContext) -> Option<&str> {
    ctx.traceparent.split('-').nth(1)
}
