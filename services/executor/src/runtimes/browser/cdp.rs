//! The Chrome DevTools Protocol over the pipe Chromium opens with `--remote-debugging-pipe`:
//! it reads commands from its fd 3 and writes answers and events to its fd 4, each message JSON
//! ended by a NUL byte. No debugging port is opened, so nothing else in the sandbox (the agent's
//! own shell included) can drive the browser around the executor's checks.
//!
//! One reader task routes answers to their callers by `id` and events to subscribers; sessions
//! are CDP's flat ones (`sessionId` on each message, from `Target.attachToTarget`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::pipe;
use tokio::sync::{broadcast, oneshot};

/// How long one command may take before the browser is judged stuck.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// An event the browser sent: its method, the session it concerns (none: the browser's), and
/// its parameters.
#[derive(Clone, Debug)]
pub struct Event {
    pub method: String,
    pub session: Option<String>,
    pub params: Value,
}

type Waiting = Arc<Mutex<HashMap<u64, oneshot::Sender<Result<Value, String>>>>>;

/// A connection to one browser.
pub struct Cdp {
    writer: tokio::sync::Mutex<pipe::Sender>,
    waiting: Waiting,
    events: broadcast::Sender<Event>,
    next: AtomicU64,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for Cdp {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl Cdp {
    /// Speaks CDP over `to_browser` (its fd 3) and `from_browser` (its fd 4).
    pub fn new(to_browser: std::fs::File, from_browser: std::fs::File) -> std::io::Result<Self> {
        let writer = pipe::Sender::from_file(to_browser)?;
        let reader = pipe::Receiver::from_file(from_browser)?;
        let waiting: Waiting = Arc::default();
        let (events, _) = broadcast::channel(256);
        let task = tokio::spawn(read(reader, waiting.clone(), events.clone()));
        Ok(Self { writer: tokio::sync::Mutex::new(writer), waiting, events, next: AtomicU64::new(1), reader: task })
    }

    /// Events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }

    /// The browser is gone (its pipe closed).
    pub fn closed(&self) -> bool {
        self.reader.is_finished()
    }

    /// Sends `method` (to `session`, or the browser itself) and waits for its result.
    pub async fn call(&self, session: Option<&str>, method: &str, params: Value) -> Result<Value, String> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = s.into();
        }
        let (tx, rx) = oneshot::channel();
        self.waiting.lock().unwrap_or_else(|e| e.into_inner()).insert(id, tx);
        let mut bytes = serde_json::to_vec(&msg).unwrap_or_default();
        bytes.push(0);
        let sent = self.writer.lock().await.write_all(&bytes).await;
        if let Err(e) = sent {
            self.waiting.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
            return Err(format!("the browser is gone ({e})"));
        }
        match tokio::time::timeout(CALL_TIMEOUT, rx).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err("the browser is gone".into()),
            Err(_) => {
                self.waiting.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
                Err(format!("the browser did not answer {method} within {} s", CALL_TIMEOUT.as_secs()))
            }
        }
    }
}

/// Reads messages until the pipe closes; then every caller still waiting hears the browser is
/// gone (their senders are dropped).
async fn read(reader: pipe::Receiver, waiting: Waiting, events: broadcast::Sender<Event>) {
    let mut reader = BufReader::with_capacity(1 << 16, reader);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match reader.read_until(0, &mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        if buf.last() == Some(&0) {
            buf.pop();
        }
        let Ok(msg) = serde_json::from_slice::<Value>(&buf) else { continue };
        if let Some(id) = msg.get("id").and_then(Value::as_u64) {
            let result = match msg.get("error") {
                Some(e) => Err(e.get("message").and_then(Value::as_str).unwrap_or("CDP error").to_owned()),
                None => Ok(msg.get("result").cloned().unwrap_or(Value::Null)),
            };
            if let Some(tx) = waiting.lock().unwrap_or_else(|e| e.into_inner()).remove(&id) {
                let _ = tx.send(result);
            }
        } else if let Some(method) = msg.get("method").and_then(Value::as_str) {
            let session = msg.get("sessionId").and_then(Value::as_str).map(str::to_owned);
            let _ = events.send(Event { method: method.to_owned(), session, params: msg.get("params").cloned().unwrap_or(Value::Null) });
        }
    }
    waiting.lock().unwrap_or_else(|e| e.into_inner()).clear();
}
