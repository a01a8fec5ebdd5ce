#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! Webhook jobs stay in each conversation's order when the fan-out changes hands: against a
//! real nats-server, two dispatchers' fan-outs (each with its own memory, as two processes)
//! handle a conversation's events out of order, the way they do when the fan-out consumer's pin
//! moves while the old holder still works through what it was handed. Each subscription's jobs
//! must sit in the deliveries stream in seq order, once each, since a lane delivers them in
//! stream order.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_nats::jetstream::{self, consumer};
use futures::StreamExt;
use halyard_callbacks::ctx::Ctx;
use halyard_callbacks::fanout::{Memory, fan_out};
use halyard_platform::bus;
use halyard_protocol::event::{ConversationEvent, EventBody, EventSource};
use halyard_protocol::system::SystemRecord;
use halyard_protocol::webhook::{DeliveryJob, WebhookSubscription};
use halyard_protocol::{ConversationId, EventId, SandboxId, TaskId, UserId, subjects};
use halyard_tests::{NatsServer, init};
use tokio::sync::Mutex;

fn subscription(id: &str, owner: &UserId, kinds: &[&str]) -> WebhookSubscription {
    WebhookSubscription {
        id: id.into(),
        owner: owner.clone(),
        url: "http://127.0.0.1:9/".into(),
        event_kinds: kinds.iter().map(|k| (*k).to_owned()).collect(),
        conversation_id: None,
        description: None,
        enabled: true,
        disabled_reason: None,
        secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
        created_ms: 0,
        updated_ms: 0,
    }
}

/// The seqs of `webhook`'s jobs, in the order the deliveries stream holds them.
async fn jobs(js: &jetstream::Context, webhook: &str) -> Vec<u64> {
    let stream = js.get_stream(subjects::DELIVERIES_STREAM).await.unwrap();
    let consumer = stream
        .create_consumer(consumer::pull::OrderedConfig { filter_subject: subjects::delivery_jobs_of(webhook), ..Default::default() })
        .await
        .unwrap();
    let mut messages = consumer.messages().await.unwrap();
    let mut out = Vec::new();
    while let Ok(Some(Ok(msg))) = tokio::time::timeout(Duration::from_millis(500), messages.next()).await {
        out.push(halyard_protocol::decode::<DeliveryJob>(&msg.payload).unwrap().payload.seq);
    }
    out
}

#[tokio::test]
async fn jobs_follow_the_conversation_order_whichever_dispatcher_fans_out_first() {
    init();
    let nats = NatsServer::start();
    let js = jetstream::new(async_nats::connect(&nats.url).await.unwrap());
    halyard_platform::nats::ensure_topology(&js, Duration::from_secs(30)).await.unwrap();

    let owner = UserId("alice".into());
    let conv = ConversationId::new();
    let created = SystemRecord::ConversationCreated {
        conversation_id: conv,
        owner: owner.clone(),
        task_id: TaskId::new(),
        sandbox_id: SandboxId::new(),
        title: None,
        repository: None,
        created_ms: halyard_platform::now_ms(),
        request: None,
    };
    bus::send(&js, subjects::conversation_record(conv), created, None).await.unwrap();
    let mut log = bus::EventAppender::open(js.clone(), conv).await.unwrap();
    let mut events: Vec<ConversationEvent> = Vec::new();
    for i in 0..7 {
        let body = if i % 3 == 0 {
            EventBody::UserMessage { text: format!("message {i}"), images: vec![], command: None }
        } else {
            EventBody::AgentError { code: "test".into(), message: format!("error {i}") }
        };
        events.push(log.append(EventId::new(), EventSource::User, body, None).await.unwrap());
    }

    // Every event to one subscription; only user messages (seq 1, 4, 7) to the other.
    let subs = HashMap::from([
        ("every".to_owned(), subscription("every", &owner, &[])),
        ("messages".to_owned(), subscription("messages", &owner, &["user_message"])),
    ]);
    let webhooks = js.get_key_value(subjects::WEBHOOK_BUCKET).await.unwrap();
    let ctx = Ctx {
        config: Arc::new(halyard_platform::Config::default()),
        js: js.clone(),
        http: reqwest::Client::new(),
        webhooks,
        subs: RwLock::new(subs),
    };
    let (old, new) = (Mutex::new(Memory::default()), Mutex::new(Memory::default()));
    let ev = |seq: usize| events[seq - 1].clone();

    // The old holder fans out 1 and 2, then stalls with 3 and 4 in hand; the new holder is
    // handed 5 and 6; then the old one goes on with 3, 4 and, last, gets 7 again.
    fan_out(&ctx, &old, ev(1)).await.unwrap();
    fan_out(&ctx, &old, ev(2)).await.unwrap();
    fan_out(&ctx, &new, ev(5)).await.unwrap();
    fan_out(&ctx, &new, ev(6)).await.unwrap();
    fan_out(&ctx, &old, ev(3)).await.unwrap();
    fan_out(&ctx, &old, ev(4)).await.unwrap();
    fan_out(&ctx, &new, ev(7)).await.unwrap();
    fan_out(&ctx, &old, ev(7)).await.unwrap();

    assert_eq!(jobs(&js, "every").await, vec![1, 2, 3, 4, 5, 6, 7], "every event, in order, once");
    assert_eq!(jobs(&js, "messages").await, vec![1, 4, 7], "the user messages, in order, once");
}
