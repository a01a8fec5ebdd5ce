//! Logging and trace context. Logs are structured `tracing` events with fields such as
//! `conversation_id` and `sandbox_id`; a trace id travels across the bus in each envelope's
//! [`TraceContext`] so one request can be followed through every service.

use halyard_protocol::TraceContext;
use tracing_subscriber::EnvFilter;

/// Installs the global subscriber (logs to stderr). `filter` is an `EnvFilter` directive such
/// as `info` or `halyard_agent=debug,info`. Safe to call twice (the second call is ignored).
pub fn init(filter: &str) {
    init_with(filter, false)
}

/// Like [`init`]; `json`: one JSON object per line (time, level, target, message, fields and
/// the spans they happened in), for a log collector.
pub fn init_with(filter: &str, json: bool) {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_target(true);
    let _ = if json {
        builder.json().flatten_event(true).with_current_span(true).with_span_list(false).try_init()
    } else {
        // Colours only for a person at a terminal: a log file keeps `field=value` greppable.
        builder.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).try_init()
    };
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
