#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a failed expectation is a failed test
//! The agent runner's buckets against a real nats-server with Halyard's topology: run leases (a
//! lease taken back over the marker its own release left is one write, and that shortcut never
//! takes a lease another runner holds or took in between), and the owner's configuration read
//! in one request.

use std::time::Duration;

use async_nats::jetstream;
use halyard_agent::lease::{Acquire, Leases};
use halyard_protocol::{ConversationId, subjects};
use halyard_tests::{NatsServer, init};

async fn leases(js: &jetstream::Context, node: &str) -> Leases {
    let kv = js.get_key_value(subjects::AGENT_LEASE_BUCKET).await.unwrap();
    Leases::new(js.clone(), kv, node.into(), Duration::from_secs(2))
}

fn held(a: Acquire) -> u64 {
    match a {
        Acquire::Held(h) => h.0,
        Acquire::Busy { node } => panic!("busy: {node} holds it"),
    }
}

#[tokio::test]
async fn a_lease_is_taken_back_over_its_own_release_marker_and_never_over_another_runner() {
    init();
    let nats = NatsServer::start();
    let js = jetstream::new(async_nats::connect(&nats.url).await.unwrap());
    halyard_platform::nats::ensure_topology(&js, Duration::from_secs(30)).await.unwrap();
    let (a, b) = (leases(&js, "node-a").await, leases(&js, "node-b").await);
    let kv = js.get_key_value(subjects::AGENT_LEASE_BUCKET).await.unwrap();
    let conv = ConversationId::new();

    // A first lease, released: the marker's revision is the key's last one, and a purge.
    let first = held(a.acquire(conv, None).await.unwrap());
    let marker = a.release(conv, halyard_agent::lease::Held(first)).await.expect("a marker revision");
    assert!(marker > first);
    let entry = kv.entry(conv.to_string()).await.unwrap().expect("the marker");
    assert_eq!((entry.revision, entry.operation), (marker, jetstream::kv::Operation::Purge));

    // Taken back over it: one write, the next revision of the stream.
    let mut stream = js.get_stream(format!("KV_{}", subjects::AGENT_LEASE_BUCKET)).await.unwrap();
    let before = stream.info().await.unwrap().state.last_sequence;
    let again = held(a.acquire(conv, Some(marker)).await.unwrap());
    assert_eq!(again, before + 1, "one write took the lease");
    assert_eq!(b.holder(conv).await.as_deref(), Some("node-a"));

    // While node-a holds it, node-b's stale marker gets it nowhere: busy, node-a still holds it.
    match b.acquire(conv, Some(marker)).await.unwrap() {
        Acquire::Busy { node } => assert_eq!(node, "node-a"),
        Acquire::Held(h) => panic!("node-b took a held lease at {h:?}"),
    }

    // Released, then taken by node-b in between: node-a's marker is stale, and node-a finds
    // node-b holding the lease.
    let marker = a.release(conv, halyard_agent::lease::Held(again)).await.unwrap();
    held(b.acquire(conv, None).await.unwrap());
    match a.acquire(conv, Some(marker)).await.unwrap() {
        Acquire::Busy { node } => assert_eq!(node, "node-b"),
        Acquire::Held(h) => panic!("node-a took node-b's lease over its stale marker at {h:?}"),
    }

    // A release of a lease that was taken over leaves no marker to the one who lost it.
    assert_eq!(a.release(conv, halyard_agent::lease::Held(again)).await, None);
    assert_eq!(b.holder(conv).await.as_deref(), Some("node-b"));
}

#[tokio::test]
async fn the_owners_keys_are_read_in_one_request_as_the_bucket_holds_them() {
    init();
    let nats = NatsServer::start();
    let js = jetstream::new(async_nats::connect(&nats.url).await.unwrap());
    halyard_platform::nats::ensure_topology(&js, Duration::from_secs(30)).await.unwrap();
    let kv = js.get_key_value(subjects::USER_BUCKET).await.unwrap();
    kv.put("settings.alice", "old".into()).await.unwrap();
    kv.put("settings.alice", "new".into()).await.unwrap();
    kv.put("llm.alice", "gone".into()).await.unwrap();
    kv.delete("llm.alice").await.unwrap();
    kv.put("git.alice", "purged".into()).await.unwrap();
    kv.purge("git.alice").await.unwrap();
    kv.put("settings.bob", "bob's".into()).await.unwrap();

    let wanted: Vec<String> = ["settings", "llm", "git", "mcp"].iter().map(|k| format!("{}{k}.alice", kv.prefix)).collect();
    let got = halyard_platform::bus::direct_last_of(&js, &kv.stream_name, &wanted).await.unwrap();
    // The latest value of a key that has one; deleted, purged and never written keys have none.
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[&format!("{}settings.alice", kv.prefix)].as_ref(), b"new");
    assert!(halyard_platform::bus::direct_last_of(&js, &kv.stream_name, &[]).await.unwrap().is_empty());
}
