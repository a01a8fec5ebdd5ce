//! Commands passed between replicas. Every replica of a service pulls from one durable
//! consumer, so a command may land on a replica that does not own its subject (an agent runner
//! that does not hold the conversation's run, a sandbox supervisor that does not host the
//! sandbox). That replica passes it to the owner over a core NATS request on the owner's own
//! subject, and settles the stream delivery by the answer: empty when the owner applied it,
//! else why to try again. An unanswered request (the owner is down) is retried later.

use std::time::Duration;

use serde::de::DeserializeOwned;

use crate::bus::Delivery;
use halyard_protocol::Envelope;

/// How a command is settled: its stream delivery, or the request of the replica that passed it
/// on.
// Moved once into an actor's mailbox, like the delivery itself: boxing would only add an
// allocation.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Settle {
    Stream(Delivery),
    Forwarded {
        nats: async_nats::Client,
        reply: async_nats::Subject,
    },
    /// Nothing to settle: the command was made here (a start taken from the start queue, whose
    /// claim stands for it).
    Local,
}

/// The answer to a forwarded command when it was applied.
const DONE: &[u8] = b"";

impl Settle {
    /// Where the command sits in the commands stream (`None` for one passed on by a replica).
    pub fn stream_sequence(&self) -> Option<u64> {
        match self {
            Self::Stream(d) => d.stream_sequence(),
            Self::Forwarded { .. } | Self::Local => None,
        }
    }

    pub async fn ack(self) {
        match self {
            Self::Stream(d) => d.ack().await,
            Self::Forwarded { nats, reply } => {
                let _ = nats.publish(reply, DONE.into()).await;
            }
            Self::Local => {}
        }
    }

    pub async fn retry(self, delay: Duration, reason: &str) {
        match self {
            Self::Stream(d) => d.retry(delay, reason).await,
            Self::Forwarded { nats, reply } => {
                let reason = if reason.is_empty() { "retry" } else { reason };
                let _ = nats.publish(reply, reason.to_owned().into()).await;
            }
            Self::Local => tracing::warn!(%reason, "a start taken from the queue could not be made"),
        }
    }
}

/// Passes `delivery` to the replica listening on `subject` and settles it with the answer;
/// `owner` names that replica in the reasons. One that does not answer (gone, or its work
/// being taken over) gets the delivery back on the stream, to be routed afresh.
pub async fn forward(nats: async_nats::Client, subject: String, owner: &str, delivery: Delivery) {
    forward_patiently(nats, subject, owner, delivery, Duration::ZERO).await
}

/// Like [`forward`], for an owner that cannot be replaced (a sandbox's host): while it does
/// not answer (it is down), the delivery is held, its redelivery postponed, and the request
/// made again every second, for up to `patience`. An owner that comes back in time gets the
/// command without the delivery spending its redeliveries on the wait.
pub async fn forward_patiently(nats: async_nats::Client, subject: String, owner: &str, delivery: Delivery, patience: Duration) {
    let payload = bytes::Bytes::copy_from_slice(delivery.payload());
    let started = tokio::time::Instant::now();
    loop {
        let why = match tokio::time::timeout(Duration::from_secs(10), nats.request(subject.clone(), payload.clone())).await {
            Ok(Ok(answer)) if answer.payload.is_empty() => return delivery.ack().await,
            Ok(Ok(answer)) => return delivery.retry(Duration::from_millis(200), &String::from_utf8_lossy(&answer.payload)).await,
            Ok(Err(e)) => format!("{owner} unreachable: {e}"),
            Err(_) => format!("{owner} did not answer"),
        };
        if started.elapsed() >= patience {
            return delivery.retry(Duration::from_millis(500), &why).await;
        }
        delivery.in_progress().await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// A command passed on by another replica, decoded; an undecodable one is answered with why.
pub async fn decode<P: DeserializeOwned>(nats: &async_nats::Client, msg: async_nats::Message) -> Option<(Envelope<P>, Settle)> {
    let reply = msg.reply?;
    match halyard_protocol::decode::<P>(&msg.payload) {
        Ok(env) => Some((env, Settle::Forwarded { nats: nats.clone(), reply })),
        Err(e) => {
            // The passing replica decoded it before; this can only be a version skew.
            let _ = nats.publish(reply, format!("undecodable here: {e}").into()).await;
            None
        }
    }
}

/// Serves the commands other replicas pass to this one on `subject`, handing each to `deliver`
/// until it returns false (its actor is gone). Subscribe before serving the durable consumer,
/// so nothing passed on in between is missed.
pub async fn serve_forwarded<P: DeserializeOwned>(
    nats: async_nats::Client,
    mut forwarded: async_nats::Subscriber,
    deliver: impl Fn(Envelope<P>, Settle) -> bool,
) {
    use futures::StreamExt;
    while let Some(msg) = forwarded.next().await {
        if let Some((env, settle)) = decode::<P>(&nats, msg).await {
            if !deliver(env, settle) {
                break;
            }
        }
    }
}
