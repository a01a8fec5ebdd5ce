//! Direct gets of a stream (no consumer made for a read): the last message on a subject or
//! filter, batches from a sequence or a time on, the last message of each of many subjects; and
//! the error maker the bus helpers share.

use std::time::Duration;

use async_nats::jetstream;
use futures::StreamExt;
use serde::de::DeserializeOwned;

use halyard_protocol::Envelope;

use crate::error::{BusError, BusErrorKind};

pub(crate) fn err(kind: BusErrorKind) -> impl Fn(&dyn std::fmt::Display) -> BusError {
    move |e| BusError::new(kind, e)
}

/// The latest message on `subject` of `stream` (which may be a wildcard filter, such as a
/// conversation's whole log), decoded, with its stream sequence. The subject goes in the direct
/// get's request body: a subject with `*` in it cannot be published to, which is where the
/// client library's own direct get would put it.
pub async fn last_record<P: DeserializeOwned>(
    js: &jetstream::Context,
    stream: &str,
    subject: &str,
) -> Result<Option<(u64, Envelope<P>)>, BusError> {
    match last_message(js, stream, subject).await? {
        Some((sequence, payload)) => Ok(Some((sequence, halyard_protocol::decode(&payload)?))),
        None => Ok(None),
    }
}

/// The last message on `subject` (wildcards allowed) in `stream`, undecoded, with its stream
/// sequence.
pub async fn last_message(js: &jetstream::Context, stream: &str, subject: &str) -> Result<Option<(u64, bytes::Bytes)>, BusError> {
    let request = serde_json::json!({ "last_by_subj": subject });
    let msg = js
        .client()
        .request(format!("$JS.API.DIRECT.GET.{stream}"), request.to_string().into())
        .await
        .map_err(|e| err(BusErrorKind::Read)(&e))?;
    direct_answer(msg, stream)
}

/// One answer to a direct get: the message with its stream sequence, or None for "no message
/// there" (404) and "end of batch" (204).
fn direct_answer(msg: async_nats::Message, stream: &str) -> Result<Option<(u64, bytes::Bytes)>, BusError> {
    if let Some(status) = msg.status {
        match status.as_u16() {
            204 | 404 => return Ok(None),
            _ if !status.is_success() => {
                let why = msg.description.as_deref().unwrap_or("no description");
                return Err(BusError::new(BusErrorKind::Read, format!("direct get on {stream}: {status} {why}")));
            }
            _ => {}
        }
    }
    let sequence = msg
        .headers
        .as_ref()
        .and_then(|h| h.get("Nats-Sequence"))
        .and_then(|v| v.as_str().parse::<u64>().ok())
        .ok_or_else(|| BusError::new(BusErrorKind::Read, "direct get answer without Nats-Sequence"))?;
    Ok(Some((sequence, msg.payload)))
}

/// Up to `batch` messages of `stream` whose subjects match `filter`, from stream sequence
/// `from` on, in order, each with its stream sequence: one batched direct get (nats-server
/// 2.11+), no consumer to create and delete. Fewer than `batch` means the end was reached.
pub async fn direct_batch(
    js: &jetstream::Context,
    stream: &str,
    filter: &str,
    from: u64,
    batch: usize,
) -> Result<Vec<(u64, bytes::Bytes)>, BusError> {
    let request = serde_json::json!({ "seq": from.max(1), "next_by_subj": filter, "batch": batch.max(1) });
    direct_batch_request(js, stream, request, batch).await
}

/// Like [`direct_batch`], from the first message the server stored at or after `since_ms`
/// (milliseconds since the epoch, by the server's clock).
pub async fn direct_batch_since(
    js: &jetstream::Context,
    stream: &str,
    filter: &str,
    since_ms: i64,
    batch: usize,
) -> Result<Vec<(u64, bytes::Bytes)>, BusError> {
    let since = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(since_ms) * 1_000_000)
        .map_err(|e| BusError::new(BusErrorKind::Read, e))?
        .format(&time::format_description::well_known::Rfc3339)
        .map_err(|e| BusError::new(BusErrorKind::Read, e))?;
    let request = serde_json::json!({ "start_time": since, "next_by_subj": filter, "batch": batch.max(1) });
    direct_batch_request(js, stream, request, batch).await
}

async fn direct_batch_request(
    js: &jetstream::Context,
    stream: &str,
    request: serde_json::Value,
    batch: usize,
) -> Result<Vec<(u64, bytes::Bytes)>, BusError> {
    let mut out = Vec::with_capacity(batch.min(1024));
    direct_get_each(js, stream, request, |msg| match direct_answer(msg, stream)? {
        Some(answer) => {
            out.push(answer);
            Ok(out.len() < batch)
        }
        None => Ok(false),
    })
    .await?;
    Ok(out)
}

/// The last message on each of `subjects` in `stream` that has one, by subject: one batched
/// direct get (`multi_last`, nats-server 2.11+) for what would be a read per subject. A key-value
/// bucket's delete and purge markers count as no message (the key has no value).
pub async fn direct_last_of(
    js: &jetstream::Context,
    stream: &str,
    subjects: &[String],
) -> Result<std::collections::HashMap<String, bytes::Bytes>, BusError> {
    let mut out = std::collections::HashMap::new();
    if subjects.is_empty() {
        return Ok(out);
    }
    let request = serde_json::json!({ "multi_last": subjects, "batch": subjects.len() });
    let mut answers = 0;
    direct_get_each(js, stream, request, |msg| {
        let header = |name: &str| msg.headers.as_ref().and_then(|h| h.get(name)).map(|v| v.as_str().to_owned());
        let (subject, operation) = (header("Nats-Subject"), header("KV-Operation"));
        let Some((_, payload)) = direct_answer(msg, stream)? else { return Ok(false) };
        let subject = subject.ok_or_else(|| BusError::new(BusErrorKind::Read, "direct get answer without Nats-Subject"))?;
        if operation.is_none_or(|op| op == "PUT") {
            out.insert(subject, payload);
        }
        // The server ends the batch itself (an end-of-batch status); this is a guard.
        answers += 1;
        Ok(answers <= subjects.len())
    })
    .await?;
    Ok(out)
}

/// Sends one batched direct get of `stream` and hands each answer to `each`, in order, until
/// `each` says it has had enough (false): at the server's end-of-batch status, or at a limit.
async fn direct_get_each(
    js: &jetstream::Context,
    stream: &str,
    request: serde_json::Value,
    mut each: impl FnMut(async_nats::Message) -> Result<bool, BusError>,
) -> Result<(), BusError> {
    let read = err(BusErrorKind::Read);
    let client = js.client();
    let inbox = client.new_inbox();
    // Subscribed before the request goes out (same connection, in order), so no reply is lost.
    let mut replies = client.subscribe(inbox.clone()).await.map_err(|e| read(&e))?;
    client.publish_with_reply(format!("$JS.API.DIRECT.GET.{stream}"), inbox, request.to_string().into()).await.map_err(|e| read(&e))?;
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(10), replies.next())
            .await
            .map_err(|_| BusError::new(BusErrorKind::Read, format!("direct get on {stream} timed out")))?
            .ok_or_else(|| BusError::new(BusErrorKind::Read, "direct get subscription closed"))?;
        if !each(msg)? {
            break;
        }
    }
    let _ = replies.unsubscribe().await;
    Ok(())
}
