//! What an operator's Prometheus and orchestrator ask of every Halyard process, whatever
//! services it runs: `/metrics` (the process's counters, gauges and histograms, rendered by
//! `metrics-exporter-prometheus` from what the services record through the `metrics` facade),
//! `/healthz` (the process is alive) and `/readyz` (every NATS connection is up and no service
//! has stopped). Served on `HALYARD_METRICS_ADDR`, apart from the public API.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{Context, Result};
use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Installs the process-wide recorder. Latencies are histograms with buckets from 1 ms to a
/// minute, so they aggregate across replicas (summaries would not).
pub fn install() -> Result<PrometheusHandle> {
    const SECONDS: &[f64] = &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS)
        .context("histogram buckets")?
        .install_recorder()
        .context("cannot install the metrics recorder")
}

/// Why `/readyz` says no.
#[derive(Clone)]
pub struct Readiness {
    pub clients: Vec<async_nats::Client>,
    /// Set once a service of the process stopped.
    pub failed: Arc<AtomicBool>,
}

/// Serves on `listener` until the process ends.
pub async fn serve(listener: tokio::net::TcpListener, handle: PrometheusHandle, ready: Readiness) {
    let app = Router::new()
        .route(
            "/metrics",
            get(move || {
                let handle = handle.clone();
                async move { ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], handle.render()) }
            }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let ready = ready.clone();
                async move {
                    let connected = ready.clients.iter().all(|c| c.connection_state() == async_nats::connection::State::Connected);
                    if ready.failed.load(Ordering::SeqCst) {
                        (StatusCode::SERVICE_UNAVAILABLE, "a service stopped")
                    } else if !connected {
                        (StatusCode::SERVICE_UNAVAILABLE, "not connected to NATS")
                    } else {
                        (StatusCode::OK, "ready")
                    }
                }
            }),
        );
    if let Err(e) = axum::serve(listener, app).await {
        tracing::error!(error = %e, "the metrics listener stopped");
    }
}
