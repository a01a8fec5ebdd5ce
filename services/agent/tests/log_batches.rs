#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! Many events appended at once (a fork's copy of its source's log) against a real nats-server
//! with Halyard's topology: in atomic batches, every event once and in order across batch
//! boundaries, masked like a single append; a batch that meets another writer stores none of
//! itself and goes on after that writer's events; a stream that does not take batches gets the
//! same log one event at a time.

use std::time::Duration;

use async_nats::jetstream;
use halyard_agent::log::Log;
use halyard_platform::bus::{self, BATCH_MAX, NewEvent};
use halyard_platform::redact::Redactor;
use halyard_protocol::event::{EventBody, EventSource, TitleSource};
use halyard_protocol::{ConversationId, EventId, subjects};
use halyard_tests::{NatsServer, init};

fn message(i: usize) -> NewEvent {
    // Some larger than others, as observations are.
    let text = format!("message {i} {}", "x".repeat(if i % 97 == 0 { 20_000 } else { 200 }));
    NewEvent { id: EventId::new(), source: EventSource::Agent, body: EventBody::AgentMessage { text }, trace: None }
}

fn text(body: &EventBody) -> String {
    match body {
        EventBody::AgentMessage { text } => text.clone(),
        other => format!("{other:?}"),
    }
}

async fn topology() -> (NatsServer, jetstream::Context) {
    let nats = NatsServer::start();
    let js = jetstream::new(async_nats::connect(&nats.url).await.unwrap());
    halyard_platform::nats::ensure_topology(&js, Duration::from_secs(30)).await.unwrap();
    (nats, js)
}

#[tokio::test]
async fn thousands_of_events_go_in_atomic_batches_once_each_in_order_and_masked() {
    init();
    let (_nats, js) = topology().await;
    let info = js.get_stream(subjects::EVENTS_STREAM).await.unwrap().cached_info().config.clone();
    assert!(info.allow_atomic_publish, "the events stream takes atomic batches on this server");

    let conv = ConversationId::new();
    let mut log = Log::load(js.clone(), conv).await.unwrap();
    log.set_redactor(std::sync::Arc::new(Redactor::new(vec![("TOKEN".into(), "hunter2hunter2".into())])));
    log.append(EventId::new(), EventSource::User, EventBody::UserMessage { text: "hi".into(), images: vec![], command: None }, None)
        .await
        .unwrap();

    let n = 2 * BATCH_MAX + 345;
    let mut events: Vec<NewEvent> = (0..n).map(message).collect();
    events[1500].body = EventBody::AgentMessage { text: "the token is hunter2hunter2".into() };
    let ids: Vec<EventId> = events.iter().map(|e| e.id).collect();
    log.append_all(events.clone()).await.unwrap();
    assert_eq!(log.history.last_seq, 1 + n as u64);

    let stored = bus::read_events(&js, conv, 0).await.unwrap();
    assert_eq!(stored.len(), 1 + n);
    for (i, e) in stored.iter().enumerate() {
        assert_eq!(e.seq, 1 + i as u64, "seqs run on without a gap");
    }
    for (i, e) in stored[1..].iter().enumerate() {
        assert_eq!(e.id, ids[i], "event {i} in its place");
        if i != 1500 {
            assert_eq!(text(&e.body), text(&events[i].body));
        }
    }
    assert_eq!(text(&stored[1501].body), "the token is <secret:TOKEN>", "masked as one append is");

    // Sent again (a redelivered fork start): the log already holds them, nothing is added.
    log.append_all(events).await.unwrap();
    assert_eq!(bus::read_events(&js, conv, 0).await.unwrap().len(), 1 + n);
}

#[tokio::test]
async fn a_batch_that_meets_another_writer_stores_none_of_itself_and_goes_on_after_it() {
    init();
    let (_nats, js) = topology().await;
    let conv = ConversationId::new();
    let mut log = Log::load(js.clone(), conv).await.unwrap();
    log.append(EventId::new(), EventSource::User, EventBody::UserMessage { text: "hi".into(), images: vec![], command: None }, None)
        .await
        .unwrap();

    // Another writer (the title setter, another runner) appends behind this log's back.
    let mut other = bus::EventAppender::open(js.clone(), conv).await.unwrap();
    let title = EventBody::Title { title: "Elsewhere".into(), set_by: TitleSource::Generated };
    other.append(EventId::new(), EventSource::System, title, None).await.unwrap();

    // This log still thinks seq 1 is the end: its first batch is refused whole, then it catches
    // up and appends after the other writer's event.
    let events: Vec<NewEvent> = (0..1200).map(message).collect();
    log.append_all(events.clone()).await.unwrap();
    let stored = bus::read_events(&js, conv, 0).await.unwrap();
    assert_eq!(stored.len(), 2 + 1200, "every event once");
    assert!(matches!(stored[1].body, EventBody::Title { .. }), "{:?}", stored[1].body);
    for (i, e) in stored[2..].iter().enumerate() {
        assert_eq!((e.seq, e.id), (3 + i as u64, events[i].id));
    }
    assert_eq!(log.history.last_seq, 1202);
}

#[tokio::test]
async fn a_stream_without_atomic_batches_gets_the_same_log_one_event_at_a_time() {
    init();
    let (_nats, js) = topology().await;
    // An events stream as an older server (or an older Halyard) left it.
    let mut config = js.get_stream(subjects::EVENTS_STREAM).await.unwrap().cached_info().config.clone();
    config.allow_atomic_publish = false;
    js.update_stream(config).await.unwrap();

    let conv = ConversationId::new();
    let mut log = Log::load(js.clone(), conv).await.unwrap();
    let events: Vec<NewEvent> = (0..30).map(message).collect();
    log.append_all(events.clone()).await.unwrap();
    let stored = bus::read_events(&js, conv, 0).await.unwrap();
    let got: Vec<(u64, EventId)> = stored.iter().map(|e| (e.seq, e.id)).collect();
    let want: Vec<(u64, EventId)> = events.iter().enumerate().map(|(i, e)| (1 + i as u64, e.id)).collect();
    assert_eq!(got, want);
}
