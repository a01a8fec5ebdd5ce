//! Requests by route, method and status, with their latency, for the process's `/metrics`.
//! The route is the matched pattern (`/api/v1/conversations/{id}`), never the raw path: one
//! series per route, whatever ids are asked for.

use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;

pub async fn track(req: Request, next: Next) -> Response {
    let route = req.extensions().get::<MatchedPath>().map(|p| p.as_str().to_owned()).unwrap_or_else(|| "unmatched".into());
    let method = req.method().as_str().to_owned();
    let started = Instant::now();
    let resp = next.run(req).await;
    let status = resp.status().as_u16().to_string();
    metrics::counter!("halyard_http_requests_total", "route" => route.clone(), "method" => method.clone(), "status" => status).increment(1);
    metrics::histogram!("halyard_http_request_seconds", "route" => route, "method" => method).record(started.elapsed().as_secs_f64());
    resp
}
