//! An HTTP receiver for webhook tests: records every request and answers as told.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use serde_json::Value;

/// One received request.
#[derive(Clone, Debug)]
pub struct Received {
    pub headers: Vec<(String, String)>,
    pub body: String,
    /// The status this receiver answered.
    pub status: u16,
    /// When the request arrived.
    pub at: std::time::SystemTime,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
    /// Milliseconds from the event's append to this request's arrival.
    pub fn latency_ms(&self) -> Option<f64> {
        let appended = appended_at(self.json()["id"].as_str()?)?;
        Some(self.at.duration_since(appended).unwrap_or_default().as_secs_f64() * 1000.0)
    }
}

/// When an event was appended: its id is a v7 UUID minted then.
pub fn appended_at(event_id: &str) -> Option<std::time::SystemTime> {
    let (s, n) = uuid::Uuid::parse_str(event_id).ok()?.get_timestamp()?.to_unix();
    Some(std::time::UNIX_EPOCH + std::time::Duration::new(s, n))
}

/// How to answer request number `n` (from 0).
pub type Behaviour = Arc<dyn Fn(usize) -> (StatusCode, Option<Duration>) + Send + Sync>;

struct Inner {
    got: Mutex<Vec<Received>>,
    behaviour: Mutex<Behaviour>,
    /// Requests being answered now, and the most there ever were at once.
    in_flight: Mutex<(usize, usize)>,
}

/// A running receiver.
#[derive(Clone)]
pub struct Receiver {
    inner: Arc<Inner>,
    pub url: String,
}

impl Receiver {
    /// A receiver that answers 200 at once.
    pub async fn start() -> Self {
        Self::with(|_| (StatusCode::OK, None)).await
    }

    /// A receiver that answers per `behaviour` (status, and an optional delay first).
    pub async fn with(behaviour: impl Fn(usize) -> (StatusCode, Option<Duration>) + Send + Sync + 'static) -> Self {
        let inner =
            Arc::new(Inner { got: Mutex::new(Vec::new()), behaviour: Mutex::new(Arc::new(behaviour)), in_flight: Mutex::new((0, 0)) });
        let app = Router::new().route("/hook", post(receive)).with_state(inner.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind receiver");
        let url = format!("http://{}/hook", listener.local_addr().expect("addr"));
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { inner, url }
    }

    /// Changes how later requests are answered.
    pub fn set(&self, behaviour: impl Fn(usize) -> (StatusCode, Option<Duration>) + Send + Sync + 'static) {
        *self.inner.behaviour.lock().expect("lock") = Arc::new(behaviour);
    }

    /// Everything received so far.
    pub fn received(&self) -> Vec<Received> {
        self.inner.got.lock().expect("lock").clone()
    }

    /// The most requests this receiver was answering at one time.
    pub fn max_in_flight(&self) -> usize {
        self.inner.in_flight.lock().expect("lock").1
    }

    /// Requests answered with 2xx.
    pub fn accepted(&self) -> Vec<Received> {
        self.received().into_iter().filter(|r| (200..300).contains(&r.status)).collect()
    }
}

async fn receive(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let n = inner.got.lock().expect("lock").len();
    let behaviour = inner.behaviour.lock().expect("lock").clone();
    let (status, delay) = behaviour(n);
    let headers = headers.iter().map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned())).collect();
    let record =
        Received { headers, body: String::from_utf8_lossy(&body).into_owned(), status: status.as_u16(), at: std::time::SystemTime::now() };
    {
        let mut f = inner.in_flight.lock().expect("lock");
        f.0 += 1;
        f.1 = f.1.max(f.0);
    }
    if let Some(d) = delay {
        tokio::time::sleep(d).await;
    }
    inner.got.lock().expect("lock").push(record);
    inner.in_flight.lock().expect("lock").0 -= 1;
    status
}
