//! What sandboxes' allowed connections through the egress proxy carry, per conversation and
//! destination ([`Usage`]): each connection counts the bytes its sandbox sends and receives as
//! they pass ([`Counted`]), and every [`REPORT_EVERY`] the proxy sends what passed since the
//! last report to the conversation's agent runner, which records it as a `network_used` event
//! (the conversation's summary and its organization's audit trail add those up). Counted as it
//! passes, so a long download shows before it ends; a report lost with a crashed supervisor
//! loses at most that interval.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use halyard_protocol::ConversationId;
use halyard_protocol::egress::NetworkUse;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// How often what passed is reported (only when something did).
pub const REPORT_EVERY: Duration = Duration::from_secs(5);

/// One destination's counts since the last report.
#[derive(Debug, Default)]
pub struct Counter {
    connections: AtomicU64,
    sent: AtomicU64,
    received: AtomicU64,
}

impl Counter {
    /// `n` more bytes from the sandbox.
    pub fn sent(&self, n: u64) {
        self.sent.fetch_add(n, Ordering::Relaxed);
    }
}

type Key = (ConversationId, String, u16);

/// The counters of every destination with traffic not yet reported.
#[derive(Default)]
pub struct Usage {
    counters: Mutex<HashMap<Key, Arc<Counter>>>,
}

impl Usage {
    /// Counts one more connection of `conversation` to `host`:`port`; its bytes go to the
    /// counter returned.
    pub fn open(&self, conversation: ConversationId, host: &str, port: u16) -> Arc<Counter> {
        let mut counters = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        let counter = counters.entry((conversation, host.to_ascii_lowercase(), port)).or_default().clone();
        counter.connections.fetch_add(1, Ordering::Relaxed);
        counter
    }

    /// What passed since the last call, per conversation (each destination with any traffic),
    /// forgetting the destinations no connection holds any more.
    pub fn take(&self) -> Vec<(ConversationId, Vec<NetworkUse>)> {
        let mut counters = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        let mut by_conversation: HashMap<ConversationId, Vec<NetworkUse>> = HashMap::new();
        for ((conversation, host, port), c) in counters.iter() {
            let used = NetworkUse {
                host: host.clone(),
                port: *port,
                connections: c.connections.swap(0, Ordering::Relaxed),
                bytes_sent: c.sent.swap(0, Ordering::Relaxed),
                bytes_received: c.received.swap(0, Ordering::Relaxed),
            };
            if used.connections + used.bytes_sent + used.bytes_received > 0 {
                by_conversation.entry(*conversation).or_default().push(used);
            }
        }
        // Held only here: no connection will add to it (a new one makes it again).
        counters.retain(|_, c| Arc::strong_count(c) > 1);
        let mut out: Vec<_> = by_conversation.into_iter().collect();
        for (_, list) in &mut out {
            list.sort_by(|a, b| (&a.host, a.port).cmp(&(&b.host, b.port)));
        }
        out
    }
}

/// A sandbox's side of a connection, counting what it reads from the sandbox (sent) and writes
/// to it (received).
pub struct Counted<'a, S> {
    inner: &'a mut S,
    counter: Option<Arc<Counter>>,
}

impl<'a, S> Counted<'a, S> {
    /// `counter`: `None` for a sandbox not in a conversation (a warm one), which is not counted.
    pub fn new(inner: &'a mut S, counter: Option<Arc<Counter>>) -> Self {
        Self { inner, counter }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<'_, S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut *self.inner).poll_read(cx, buf);
        if let (Poll::Ready(Ok(())), Some(c)) = (&polled, &self.counter) {
            c.sent.fetch_add((buf.filled().len() - before) as u64, Ordering::Relaxed);
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<'_, S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut *self.inner).poll_write(cx, data);
        if let (Poll::Ready(Ok(n)), Some(c)) = (&polled, &self.counter) {
            c.received.fetch_add(*n as u64, Ordering::Relaxed);
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut *self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn traffic_is_counted_as_it_passes_and_reported_once() {
        let usage = Usage::default();
        let conv = ConversationId::new();
        let (mut sandbox, mut proxy_side) = tokio::io::duplex(1024);
        let counter = usage.open(conv, "Registry.test", 443);
        let mut counted = Counted::new(&mut proxy_side, Some(counter.clone()));
        sandbox.write_all(b"hello").await.unwrap();
        let mut buf = [0u8; 5];
        counted.read_exact(&mut buf).await.unwrap();
        counted.write_all(b"a longer answer").await.unwrap();
        counter.sent(10);
        // Reported while the connection is open, and nothing twice.
        let first = usage.take();
        assert_eq!(first.len(), 1);
        assert_eq!(
            first[0].1,
            vec![NetworkUse { host: "registry.test".into(), port: 443, connections: 1, bytes_sent: 15, bytes_received: 15 }]
        );
        assert!(usage.take().is_empty());
        // The connection ended: its destination is forgotten once reported.
        drop(counted);
        drop(counter);
        assert!(usage.take().is_empty());
        assert!(usage.counters.lock().unwrap().is_empty());
    }
}
