//! The HTTP server under the API and the apps proxy, with its connections bounded: a client
//! that sends its headers slowly (or not at all), a body that stops, or thousands of idle
//! sockets from one address cannot use up the gateway's connections or file descriptors.
//!
//! - Headers must arrive within `http_header_timeout_secs`, and a kept-alive connection waits
//!   no longer than that for its next request (hyper's header-read timer runs from the moment
//!   the connection starts waiting for a request head).
//! - A request body may go `http_body_timeout_secs` without sending anything.
//! - At most `http_max_connections` connections are open on a listener, and at most
//!   `http_max_connections_per_client` from one client address (IPv6 by /64): one address
//!   cannot take them all. A connection past either is closed at once.
//! - WebSockets are pinged and closed when their pongs stop ([`crate::api::conversations::ws`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tower::ServiceExt;

use halyard_platform::Shutdown;
use halyard_platform::config::GatewayConfig;
use halyard_platform::netaddr;

/// How long open connections get to finish after a shutdown.
const DRAIN: Duration = Duration::from_secs(10);

/// The bounds of one listener's connections.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    pub max_connections: usize,
    pub max_per_client: usize,
}

impl Limits {
    pub fn from_config(c: &GatewayConfig) -> Self {
        Self {
            header_timeout: Duration::from_secs(c.http_header_timeout_secs),
            body_timeout: Duration::from_secs(c.http_body_timeout_secs),
            max_connections: c.http_max_connections,
            max_per_client: c.http_max_connections_per_client,
        }
    }
}

/// Open connections per client group; a slot gives its place back when dropped.
#[derive(Clone, Default)]
struct PerClient(Arc<Mutex<HashMap<String, usize>>>);

struct Slot {
    table: PerClient,
    group: String,
}

impl PerClient {
    fn take(&self, group: String, max: usize) -> Option<Slot> {
        let mut t = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let n = t.entry(group.clone()).or_insert(0);
        if *n >= max {
            return None;
        }
        *n += 1;
        Some(Slot { table: self.clone(), group })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut t = self.table.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = t.get_mut(&self.group) {
            *n -= 1;
            if *n == 0 {
                t.remove(&self.group);
            }
        }
    }
}

/// Serves `router` on `listener` until `shutdown`, then lets open connections finish for a
/// while. Handlers see the peer as `ConnectInfo<SocketAddr>`.
pub async fn serve(listener: TcpListener, router: Router, limits: Limits, mut shutdown: Shutdown) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(limits.header_timeout);
    builder.http2().timer(TokioTimer::new()).keep_alive_interval(Duration::from_secs(20));
    let graceful = GracefulShutdown::new();
    let total = Arc::new(Semaphore::new(limits.max_connections));
    let per_client = PerClient::default();
    loop {
        let (stream, peer) = tokio::select! {
            _ = shutdown.wait() => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors, most likely: back off rather than spin.
                    tracing::warn!(error = %e, "cannot accept a connection");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        // An event frame or an answer's piece goes out at once, not behind Nagle's algorithm.
        let _ = stream.set_nodelay(true);
        let Ok(permit) = total.clone().try_acquire_owned() else {
            metrics::counter!("halyard_http_connections_refused_total", "reason" => "listener_full").increment(1);
            continue;
        };
        let Some(slot) = per_client.take(netaddr::client_group(peer.ip()), limits.max_per_client) else {
            metrics::counter!("halyard_http_connections_refused_total", "reason" => "client_full").increment(1);
            continue;
        };
        let service = tower::ServiceBuilder::new()
            .layer(tower_http::timeout::RequestBodyTimeoutLayer::new(limits.body_timeout))
            .service(router.clone())
            .map_request(move |mut req: axum::http::Request<_>| {
                req.extensions_mut().insert(ConnectInfo::<SocketAddr>(peer));
                req
            });
        let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), TowerToHyperService::new(service)).into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(%peer, error = %e, "connection ended");
            }
            drop(permit);
            drop(slot);
        });
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(DRAIN) => tracing::info!("connections still open after the drain time; closing them"),
    }
}
