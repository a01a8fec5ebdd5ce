//! Stage two: one worker per enabled subscription delivers its jobs, in
//! [`subjects::DELIVERY_LANES`] lanes. A lane is a durable consumer with one job in flight, and a
//! conversation's jobs are always in the same lane, so each conversation's events reach the
//! endpoint in order while the lanes deliver side by side.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::jetstream::{AckKind, consumer};
use futures::StreamExt;

use halyard_platform::{bus, keys, net};
use halyard_protocol::subjects;
use halyard_protocol::system::SystemRecord;
use halyard_protocol::webhook::{AttemptOutcome, DeliveryAttempt, DeliveryJob, WebhookSubscription};

use crate::ctx::Ctx;

/// How long a job may be held without a sign of life.
const ACK_WAIT: Duration = Duration::from_secs(5);

/// The durable consumer of one lane of a subscription's jobs.
pub fn consumer_name(webhook: &str, lane: u32) -> String {
    format!("webhook-{webhook}-{lane}")
}

/// The one consumer a subscription had before lanes (every job, one at a time); deleted so it
/// does not deliver beside the lanes.
pub fn legacy_consumer_name(webhook: &str) -> String {
    format!("webhook-{webhook}")
}

/// How one attempt went.
enum Outcome {
    Delivered(u16),
    /// Worth another attempt (non-2xx, timeout, connection refused).
    Failed {
        status: Option<u16>,
        error: String,
    },
    /// Never worth another attempt (the destination is not allowed).
    Refused(String),
}

/// Delivers one subscription's jobs until aborted (or the subscription is disabled).
pub async fn run(ctx: Arc<Ctx>, webhook: String) {
    if let Ok(stream) = ctx.js.get_stream_no_info(subjects::DELIVERIES_STREAM).await {
        let _ = stream.delete_consumer(&legacy_consumer_name(&webhook)).await;
    }
    // A JoinSet aborts the lanes when dropped: aborting this task stops them too.
    let mut lanes = tokio::task::JoinSet::new();
    for lane in 0..subjects::DELIVERY_LANES {
        lanes.spawn(run_lane(ctx.clone(), webhook.clone(), lane));
    }
    while lanes.join_next().await.is_some() {}
}

/// Delivers one lane's jobs, one at a time, until the subscription is disabled.
async fn run_lane(ctx: Arc<Ctx>, webhook: String, lane: u32) {
    let mut backoff = Duration::from_millis(200);
    loop {
        match deliver_all(&ctx, &webhook, lane).await {
            Ok(()) => return,
            Err(e) => {
                tracing::warn!(%webhook, lane, error = %e, "webhook worker interrupted; restarting");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(10));
            }
        }
    }
}

async fn deliver_all(ctx: &Ctx, webhook: &str, lane: u32) -> Result<(), String> {
    let stream = ctx.js.get_stream_no_info(subjects::DELIVERIES_STREAM).await.map_err(|e| e.to_string())?;
    let config = consumer::pull::Config {
        durable_name: Some(consumer_name(webhook, lane)),
        filter_subject: subjects::delivery_lane_jobs(webhook, lane),
        ack_policy: consumer::AckPolicy::Explicit,
        // One in flight: the next job waits until this one is delivered or parked.
        max_ack_pending: 1,
        // Short, with progress acks while an attempt runs: if this worker dies, its job comes
        // back to the next one within seconds, however long the request timeout is.
        ack_wait: ACK_WAIT,
        max_deliver: -1,
        ..Default::default()
    };
    let consumer: consumer::PullConsumer =
        stream.get_or_create_consumer(&consumer_name(webhook, lane), config).await.map_err(|e| e.to_string())?;
    let mut messages = halyard_platform::bus::pull_messages(&consumer).await.map_err(|e| e.to_string())?;
    let mut failing_since: Option<Instant> = None;
    while let Some(msg) = messages.next().await {
        let msg = msg.map_err(|e| e.to_string())?;
        let job = match halyard_protocol::decode::<DeliveryJob>(&msg.payload) {
            Ok(env) => env.payload,
            Err(e) => {
                tracing::error!(%webhook, error = %e, "undecodable delivery job; dropping it");
                let _ = msg.ack_with(AckKind::Term).await;
                continue;
            }
        };
        let sub = ctx.subs.read().ok().and_then(|s| s.get(webhook).cloned());
        let Some(sub) = sub.filter(|s| s.enabled) else {
            // Disabled or deleted meanwhile: leave the job for when it is enabled again.
            let _ = msg.ack_with(AckKind::Nak(Some(Duration::from_secs(5)))).await;
            return Ok(());
        };
        let delivered = msg.info().map(|i| i.delivered).unwrap_or(1).max(1) as u32;
        let attempt = job.prior_attempts + delivered;
        let started = Instant::now();
        let outcome = {
            let attempt = attempt_once(ctx, &sub, &job);
            tokio::pin!(attempt);
            let mut tick = tokio::time::interval(ACK_WAIT / 3);
            tick.tick().await;
            loop {
                tokio::select! {
                    o = &mut attempt => break o,
                    _ = tick.tick() => { let _ = msg.ack_with(AckKind::Progress).await; }
                }
            }
        };
        let duration_ms = started.elapsed().as_millis() as u64;
        let max = ctx.config.webhooks.max_attempts.max(1);
        let (status_code, error, result) = match outcome {
            Outcome::Delivered(code) => (Some(code), None, AttemptOutcome::Succeeded),
            Outcome::Failed { status, error } if attempt < max => (status, Some(error), AttemptOutcome::Retrying),
            Outcome::Failed { status, error } => (status, Some(error), AttemptOutcome::Failed),
            Outcome::Refused(error) => (None, Some(error), AttemptOutcome::Failed),
        };
        let label = match result {
            AttemptOutcome::Succeeded => "succeeded",
            AttemptOutcome::Retrying => "retrying",
            AttemptOutcome::Failed => "failed",
        };
        metrics::counter!("halyard_webhook_deliveries_total", "outcome" => label).increment(1);
        metrics::histogram!("halyard_webhook_delivery_seconds", "outcome" => label).record(started.elapsed().as_secs_f64());
        if result == AttemptOutcome::Succeeded {
            // From the event's append to its receiver's 2xx: what a subscriber waits.
            let lag = halyard_platform::now_ms().saturating_sub(job.event_ms).max(0) as f64 / 1000.0;
            metrics::histogram!("halyard_webhook_event_to_delivery_seconds").record(lag);
        }
        record(ctx, &job, attempt, status_code, error.clone(), duration_ms, result).await;
        match result {
            AttemptOutcome::Succeeded => {
                failing_since = None;
                // A plain ack: with one message in flight the server applies it before it
                // sends the next job, so order holds without waiting for a confirmation.
                let _ = msg.ack().await;
            }
            AttemptOutcome::Retrying => {
                let since = *failing_since.get_or_insert_with(Instant::now);
                let delay = retry_delay(ctx, attempt);
                tracing::info!(%webhook, attempt, ?delay, error = ?error, "delivery failed; retrying later");
                let _ = msg.ack_with(AckKind::Nak(Some(delay))).await;
                if disable_if_failing_too_long(ctx, &sub, since).await {
                    return Ok(());
                }
            }
            AttemptOutcome::Failed => {
                let since = *failing_since.get_or_insert_with(Instant::now);
                tracing::warn!(%webhook, attempt, error = ?error, "delivery failed for good; parked");
                // Parked: the attempt record says so, and the API can queue it again.
                let _ = msg.ack_with(AckKind::Term).await;
                if disable_if_failing_too_long(ctx, &sub, since).await {
                    return Ok(());
                }
            }
        }
    }
    Err("delivery consumer ended".into())
}

/// Exponential backoff with +-25 % jitter, capped.
fn retry_delay(ctx: &Ctx, attempt: u32) -> Duration {
    let cfg = &ctx.config.webhooks;
    let base = cfg.retry_base_ms.saturating_mul(1u64 << attempt.saturating_sub(1).min(20)).min(cfg.retry_max_ms);
    let r = uuid::Uuid::new_v4().as_u128() as u64 % 1000;
    let jitter = base as f64 * (0.75 + 0.5 * (r as f64 / 1000.0));
    Duration::from_millis(jitter as u64)
}

async fn attempt_once(ctx: &Ctx, sub: &WebhookSubscription, job: &DeliveryJob) -> Outcome {
    let url = match net::check_destination(&sub.url, &ctx.config.webhooks.allow).await {
        Ok(u) => u,
        Err(e @ net::DestinationError::Unresolvable(..)) => return Outcome::Failed { status: None, error: e.to_string() },
        Err(e) => return Outcome::Refused(format!("destination_not_allowed: {e}")),
    };
    let msg_id = job.delivery_id.to_string();
    let timestamp = halyard_platform::now_ms() / 1000;
    let Some(signature) = keys::webhook_signature(&sub.secret, &msg_id, timestamp, job.body.as_bytes()) else {
        return Outcome::Refused("the subscription's secret is malformed; rotate it".into());
    };
    let sent = ctx
        .http
        .post(url)
        .header("content-type", "application/json")
        .header("webhook-id", &msg_id)
        .header("webhook-timestamp", timestamp.to_string())
        .header("webhook-signature", signature)
        .header("user-agent", "Halyard-Webhooks/1")
        .body(job.body.clone())
        .send()
        .await;
    match sent {
        Ok(resp) if resp.status().is_success() => Outcome::Delivered(resp.status().as_u16()),
        Ok(resp) => Outcome::Failed { status: Some(resp.status().as_u16()), error: format!("HTTP {}", resp.status()) },
        Err(e) if e.is_timeout() => Outcome::Failed { status: None, error: "timed out".into() },
        Err(e) => Outcome::Failed { status: None, error: e.to_string() },
    }
}

async fn record(
    ctx: &Ctx,
    job: &DeliveryJob,
    attempt: u32,
    status_code: Option<u16>,
    error: Option<String>,
    duration_ms: u64,
    outcome: AttemptOutcome,
) {
    let record = SystemRecord::DeliveryAttempt(DeliveryAttempt {
        delivery_id: job.delivery_id,
        webhook_id: job.webhook_id.clone(),
        owner: job.owner.clone(),
        conversation_id: job.conversation_id,
        event_id: job.event_id,
        seq: job.seq,
        attempt,
        status_code,
        error,
        duration_ms,
        outcome,
        time_ms: halyard_platform::now_ms(),
    });
    // Sent now, its acknowledgement awaited off the delivery path.
    let env = halyard_protocol::Envelope::new(record, halyard_platform::now_ms());
    match bus::publish_pending(&ctx.js, subjects::delivery_record(&job.webhook_id), &env).await {
        Ok(ack) => {
            let webhook = job.webhook_id.clone();
            tokio::spawn(async move {
                if let Err(e) = ack.await {
                    tracing::error!(%webhook, error = %e, "delivery attempt record not stored");
                }
            });
        }
        Err(e) => tracing::error!(webhook = %job.webhook_id, error = %e, "cannot record delivery attempt"),
    }
}

/// Disables a subscription that has not succeeded for the configured time. Returns whether it
/// did.
async fn disable_if_failing_too_long(ctx: &Ctx, sub: &WebhookSubscription, since: Instant) -> bool {
    let limit = Duration::from_secs(ctx.config.webhooks.disable_after_secs);
    if since.elapsed() < limit {
        return false;
    }
    let reason = format!("every delivery failed for {} s", since.elapsed().as_secs());
    let Ok(Some(entry)) = ctx.webhooks.entry(&sub.id).await else { return false };
    let Ok(mut current) = serde_json::from_slice::<WebhookSubscription>(&entry.value) else { return false };
    current.enabled = false;
    current.disabled_reason = Some(reason.clone());
    current.updated_ms = halyard_platform::now_ms();
    let Ok(bytes) = serde_json::to_vec(&current) else { return false };
    if ctx.webhooks.update(&sub.id, bytes.into(), entry.revision).await.is_err() {
        return false;
    }
    tracing::warn!(webhook = %sub.id, %reason, "webhook disabled");
    let record = SystemRecord::WebhookDisabled { webhook_id: sub.id.clone(), owner: sub.owner.clone(), reason };
    let _ = bus::send(&ctx.js, subjects::webhook_record(&sub.id), record, None).await;
    true
}
