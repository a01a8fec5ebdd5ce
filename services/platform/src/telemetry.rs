//! Logging, traces and trace context. Logs are structured `tracing` events with fields such as
//! `conversation_id` and `sandbox_id`; a trace id travels across the bus in each envelope's
//! [`TraceContext`] so one request can be followed through every service. With an OTLP
//! endpoint, spans are also exported as OpenTelemetry traces ([`continue_trace`] puts a
//! service's span for a message under the trace its envelope carries).

use halyard_protocol::TraceContext;
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, TracerProvider};
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Where the process's traces go.
#[derive(Clone, Debug)]
pub struct Otlp {
    /// The collector's OTLP/HTTP base URL (`/v1/traces` is appended).
    pub endpoint: String,
    /// `service.name` of this process's spans.
    pub service: String,
}

/// Exports the spans still buffered when dropped (call it before the process exits).
#[derive(Debug, Default)]
pub struct Traces(Option<SdkTracerProvider>);

impl Drop for Traces {
    fn drop(&mut self) {
        if let Some(provider) = self.0.take() {
            if let Err(e) = provider.shutdown() {
                tracing::warn!(error = %e, "traces not all exported");
            }
        }
    }
}

/// Installs the global subscriber (logs to stderr). `filter` is an `EnvFilter` directive such
/// as `info` or `halyard_agent=debug,info`. Safe to call twice (the second call is ignored).
pub fn init(filter: &str) {
    drop(init_with(filter, false, None));
}

/// Like [`init`]; `json`: one JSON object per line (time, level, target, message, fields and
/// the spans they happened in), for a log collector; `otlp`: spans also go to an OTLP/HTTP
/// collector, batched on the tokio runtime (call it inside one). An exporter that cannot be
/// built is logged and skipped: traces are never a reason not to start.
pub fn init_with(filter: &str, json: bool, otlp: Option<Otlp>) -> Traces {
    let filter = EnvFilter::try_new(filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let (provider, failed) = match otlp.map(provider) {
        Some(Ok(p)) => (Some(p), None),
        Some(Err(e)) => (None, Some(e)),
        None => (None, None),
    };
    let traces = provider.as_ref().map(|p| tracing_opentelemetry::layer().with_tracer(p.tracer("halyard")));
    let registry = tracing_subscriber::registry().with(filter).with(traces);
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_target(true);
    let _ = if json {
        registry.with(fmt.json().flatten_event(true).with_current_span(true).with_span_list(false)).try_init()
    } else {
        // Colours only for a person at a terminal: a log file keeps `field=value` greppable.
        registry.with(fmt.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))).try_init()
    };
    if let Some(e) = failed {
        tracing::error!(error = %e, "cannot export traces over OTLP; going on without");
    }
    Traces(provider)
}

fn provider(otlp: Otlp) -> Result<SdkTracerProvider, String> {
    use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(format!("{}/v1/traces", otlp.endpoint))
        .with_headers(Default::default())
        .build()
        .map_err(|e| e.to_string())?;
    let batches = opentelemetry_sdk::trace::span_processor_with_async_runtime::BatchSpanProcessor::builder(
        exporter,
        opentelemetry_sdk::runtime::Tokio,
    )
    .build();
    let resource = opentelemetry_sdk::Resource::builder().with_service_name(otlp.service).build();
    Ok(SdkTracerProvider::builder().with_span_processor(batches).with_resource(resource).build())
}

/// Puts `span` (made for a message, not yet entered) under the trace `ctx` names, so its
/// exported span joins the trace begun where the message was sent. A missing or malformed
/// context leaves it a root.
pub fn continue_trace(span: &tracing::Span, ctx: Option<&TraceContext>) {
    let Some(parent) = ctx.and_then(remote_parent) else { return };
    let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(parent));
}

/// The span context of a `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`).
fn remote_parent(ctx: &TraceContext) -> Option<SpanContext> {
    let mut parts = ctx.traceparent.split('-');
    let (_version, trace, span, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    let trace = TraceId::from_hex(trace).ok().filter(|t| *t != TraceId::INVALID)?;
    let span = SpanId::from_hex(span).ok().filter(|s| *s != SpanId::INVALID)?;
    let flags = TraceFlags::new(u8::from_str_radix(flags, 16).ok()?);
    Some(SpanContext::new(trace, span, flags, true, TraceState::default()))
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
