//! Commands reach the runner that holds the conversation's run. Every replica pulls from the
//! one `agent-runner` consumer, so a command may land on a runner that does not run the
//! conversation; while another runner holds a live lease, the command is passed to it over a
//! core NATS request on `halyard.run.<node>` and the stream delivery is settled by its answer.
//! An unanswered request (the holder just died) is retried later, by when the lease has been
//! taken over.

use std::time::Duration;

use halyard_platform::bus::Delivery;
use halyard_protocol::command::AgentCommand;
use halyard_protocol::{Envelope, subjects};

/// How the command that an actor handles is settled: its stream delivery, or the request of the
/// runner that passed it on.
// Moved once into the actor's mailbox, like the delivery itself: boxing would only add an
// allocation.
#[allow(clippy::large_enum_variant)]
pub enum Settle {
    Stream(Delivery),
    Forwarded { nats: async_nats::Client, reply: async_nats::Subject },
}

/// The answer to a forwarded command: empty when done, else why to try again.
const DONE: &[u8] = b"";

impl Settle {
    pub async fn ack(self) {
        match self {
            Self::Stream(d) => d.ack().await,
            Self::Forwarded { nats, reply } => {
                let _ = nats.publish(reply, DONE.into()).await;
            }
        }
    }

    pub async fn retry(self, delay: Duration, reason: &str) {
        match self {
            Self::Stream(d) => d.retry(delay, reason).await,
            Self::Forwarded { nats, reply } => {
                let reason = if reason.is_empty() { "retry" } else { reason };
                let _ = nats.publish(reply, reason.to_owned().into()).await;
            }
        }
    }
}

/// Passes `delivery` to runner `node` and settles it with the answer.
pub async fn forward(nats: async_nats::Client, node: String, delivery: Delivery) {
    metrics::counter!("halyard_agent_commands_forwarded_total").increment(1);
    let payload = bytes::Bytes::copy_from_slice(delivery.payload());
    let asked = tokio::time::timeout(Duration::from_secs(10), nats.request(subjects::agent_node(&node), payload)).await;
    match asked {
        Ok(Ok(answer)) if answer.payload.is_empty() => delivery.ack().await,
        Ok(Ok(answer)) => delivery.retry(Duration::from_millis(200), &String::from_utf8_lossy(&answer.payload)).await,
        // No such runner any more, or it did not answer: its lease will be taken over.
        Ok(Err(e)) => delivery.retry(Duration::from_millis(500), &format!("runner {node} unreachable: {e}")).await,
        Err(_) => delivery.retry(Duration::from_millis(500), &format!("runner {node} did not answer")).await,
    }
}

/// A command passed on by another runner, decoded; an undecodable one is answered with why.
pub async fn decode(nats: &async_nats::Client, msg: async_nats::Message) -> Option<(Envelope<AgentCommand>, Settle)> {
    let reply = msg.reply?;
    match halyard_protocol::decode::<AgentCommand>(&msg.payload) {
        Ok(env) => Some((env, Settle::Forwarded { nats: nats.clone(), reply })),
        Err(e) => {
            // The passing runner decoded it before; this can only be a version skew.
            let _ = nats.publish(reply, format!("undecodable here: {e}").into()).await;
            None
        }
    }
}
